from durably.cli.main import main

main()
