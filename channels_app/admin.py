from django.contrib import admin

from channels_app.models import ChannelChat, ChannelIdentity, HousekeepingTally, LarkEvent


@admin.register(ChannelIdentity)
class ChannelIdentityAdmin(admin.ModelAdmin):
    list_display = ["channel", "external_id", "user", "created_at"]
    list_filter = ["channel"]
    search_fields = ["external_id", "user__username"]
    raw_id_fields = ["user"]


@admin.register(ChannelChat)
class ChannelChatAdmin(admin.ModelAdmin):
    list_display = ["channel", "chat_id", "user", "session", "updated_at"]
    list_filter = ["channel"]
    search_fields = ["chat_id", "user__username"]
    raw_id_fields = ["user", "session"]


@admin.register(LarkEvent)
class LarkEventAdmin(admin.ModelAdmin):
    """Delivered events, for tracing what the bot received and did (read-only)."""

    list_display = ["event_id", "event_type", "status", "received_at", "processed_at"]
    list_filter = ["status", "event_type"]
    search_fields = ["event_id", "note"]
    readonly_fields = [
        "event_id",
        "event_type",
        "payload",
        "status",
        "note",
        "received_at",
        "processed_at",
    ]

    def has_add_permission(self, request) -> bool:
        return False


@admin.register(HousekeepingTally)
class HousekeepingTallyAdmin(admin.ModelAdmin):
    """The chat apps' housekeeping requests /v1 recognised, a day per row (read-only: counted by
    channels_app.openai.housekeeping_tally, never edited)."""

    list_display = ["day", "app", "kind", "count"]
    list_filter = ["app", "kind", "day"]
    date_hierarchy = "day"

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
