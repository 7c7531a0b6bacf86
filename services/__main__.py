from services.targets import main

main()
