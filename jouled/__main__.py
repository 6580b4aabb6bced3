from jouled.cli import main

main()
