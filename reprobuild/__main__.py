from reprobuild.cli.main import main

main()
