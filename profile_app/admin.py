from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError

from profile_app import services
from profile_app.markdown import normalize_content
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


class ProfileSectionForm(forms.ModelForm):
    class Meta:
        model = ProfileSection
        fields = ["owner", "key", "content"]

    def clean(self):
        # The whole profile's limit is the service's: asked here too, so a profile that would
        # grow past it is a message on the form rather than an error page on save.
        data = super().clean()
        if data.get("owner") and data.get("key") and data.get("content") is not None:
            try:
                services.profile_check_length(
                    owner=data["owner"], key=data["key"], new=normalize_content(data["content"])
                )
            except ValueError as exc:
                raise ValidationError(str(exc)) from None
        return data


@admin.register(ProfileSection)
class ProfileSectionAdmin(admin.ModelAdmin):
    form = ProfileSectionForm
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
        restored = 0
        for revision in queryset.select_related("section"):
            try:
                services.profile_update(
                    owner=revision.section.owner,
                    section=revision.section.key,
                    entry=revision.old_content,
                    mode="overwrite",
                    actor=f"admin:{request.user.get_username()} (undo #{revision.pk})",
                )
            except ValueError as exc:  # the old text no longer fits the profile's limit
                self.message_user(request, f"#{revision.pk} not restored: {exc}", messages.ERROR)
                continue
            restored += 1
        self.message_user(request, f"Restored {restored} section(s).", messages.SUCCESS)
