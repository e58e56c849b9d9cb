from django.contrib import admin

from oauth_app.models import Connection
from oauth_app.services import connection_end


@admin.register(Connection)
class ConnectionAdmin(admin.ModelAdmin):
    list_display = ["application", "owner", "scope", "connected_at", "last_used_at"]
    list_filter = ["scope"]
    search_fields = ["application__name", "application__client_id", "owner__username"]
    list_select_related = ["application", "owner"]
    raw_id_fields = ["owner", "application"]
    readonly_fields = ["connected_at", "last_used_at"]
    actions = ["disconnect"]

    @admin.action(description="Disconnect (revoke the app's tokens now)")
    def disconnect(self, request, queryset):
        for connection in queryset:
            connection_end(connection=connection)
