from durably.cli import main

main()
