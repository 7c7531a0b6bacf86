from shared.migrations_env import run

run()
