from django.apps import AppConfig


class AgentAppConfig(AppConfig):
    """The turn and the channels: console, REST API, Lark."""

    name = "agent_app"
    verbose_name = "Agent"
