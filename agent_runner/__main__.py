from agent_runner.cli import main

main()
