from fasttts_cli.cli.commands import main

main()
