from django.contrib import admin, messages

from profile_app import services
from profile_app.models import ProfileRevision, ProfileSection


class ProfileRevisionInline(admin.TabularInline):
    model = ProfileRevision
    fields = ["created_at", "mode", "actor", "old_content", "new_content"]
    readonly_fields = fields
    ordering = ["-created_at", "-id"]
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(ProfileSection)
class ProfileSectionAdmin(admin.ModelAdmin):
    list_display = ["owner", "key", "updated_at"]
    list_filter = ["key"]
    list_select_related = ["owner"]
    search_fields = ["owner__username", "content"]
    raw_id_fields = ["owner"]
    fields = ["owner", "key", "content", "updated_at"]
    readonly_fields = ["updated_at"]
    inlines = [ProfileRevisionInline]

    def save_model(self, request, obj, form, change):
        # Through the service, so the previous text is kept as a revision.
        section = services.profile_update(
            owner=obj.owner,
            section=obj.key,
            entry=obj.content,
            mode="overwrite",
            actor=f"admin:{request.user.get_username()}",
        )
        obj.pk = section.pk


@admin.register(ProfileRevision)
class ProfileRevisionAdmin(admin.ModelAdmin):
    list_display = ["section", "mode", "actor", "created_at"]
    list_filter = ["mode"]
    search_fields = ["section__owner__username", "old_content", "new_content"]
    readonly_fields = ["section", "mode", "old_content", "new_content", "actor", "created_at"]
    actions = ["undo"]

    def has_add_permission(self, request) -> bool:
        return False

    @admin.action(description="Undo: put back the text from before this change")
    def undo(self, request, queryset):
        for revision in queryset.select_related("section"):
            services.profile_update(
                owner=revision.section.owner,
                section=revision.section.key,
                entry=revision.old_content,
                mode="overwrite",
                actor=f"admin:{request.user.get_username()} (undo #{revision.pk})",
            )
        self.message_user(request, f"Restored {queryset.count()} section(s).", messages.SUCCESS)
