from fasttts_cli.cli import main

main()
