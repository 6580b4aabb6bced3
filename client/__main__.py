from jb_client.entry import main

main()
