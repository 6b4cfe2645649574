"""The ``gpuspawner`` subcommands, one module each (see ``gpuspawner.cli.COMMANDS``)."""
