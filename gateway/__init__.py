"""aiohttp apps that translate HTTP into commands and events, the configuration, the CLI."""
