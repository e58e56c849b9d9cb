from django.contrib import admin, messages

from sessions_app import services
from sessions_app.models import ChatSession, ImportRun, Message


class MessageInline(admin.TabularInline):
    """A conversation is a record: the admin reads it, never rewrites it."""

    model = Message
    fields = ["seq", "role", "content", "tool_calls", "tool_call_id", "created_at"]
    readonly_fields = fields
    ordering = ["seq"]
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(ChatSession)
class ChatSessionAdmin(admin.ModelAdmin):
    list_display = ["id", "owner", "title", "model", "mode", "channel", "last_seq", "updated_at"]
    list_filter = ["model", "channel", "mode", ("created_at", admin.DateFieldListFilter)]
    list_select_related = ["owner"]
    search_fields = ["id", "title", "owner__username"]
    date_hierarchy = "created_at"
    raw_id_fields = ["owner"]
    readonly_fields = ["id", "last_seq", "created_at", "updated_at"]
    inlines = [MessageInline]
    actions = ["cleanup_empty"]

    @admin.action(description="Delete the selected sessions that have no messages")
    def cleanup_empty(self, request, queryset):
        removed = services.sessions_cleanup_empty(
            session_ids=list(queryset.values_list("pk", flat=True))
        )
        self.message_user(request, f"Removed {removed} empty session(s).", messages.SUCCESS)


@admin.register(ImportRun)
class ImportRunAdmin(admin.ModelAdmin):
    """Imports of other assistants' exports, as far as each got: read-only (a run is a record
    of what happened; the upload itself is never shown)."""

    list_display = [
        "id",
        "owner",
        "source",
        "file_name",
        "status",
        "conversations_done",
        "sessions_created",
        "learn_done",
        "learn_total",
        "updated_at",
    ]
    list_filter = ["source", "status"]
    list_select_related = ["owner"]
    search_fields = ["file_name", "owner__username"]
    exclude = ["upload"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
