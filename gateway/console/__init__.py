"""The web console, served by the gateway on ``CAIRN_PORT`` beside ``/health`` and ``/status``
(see docs/console.md). ``gateway.console.app.mount`` adds its routes to that app."""
