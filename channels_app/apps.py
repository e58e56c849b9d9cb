from django.apps import AppConfig


class ChannelsConfig(AppConfig):
    """The doors, above the turn (agent_app): each a thin adapter from its wire format to one
    turn. An app for its management commands (ethan_chat, ethan_serve's doors) and its tasks
    (the Lark channel's); the models the doors keep (a Lark event, a chat app's conversation)
    stay in agent_app, whose migrations have them."""

    name = "channels_app"
    label = "channels"
