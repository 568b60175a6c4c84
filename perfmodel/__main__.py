from perfmodel.cli import main

main()
