from jb_client.cli import main

main()
