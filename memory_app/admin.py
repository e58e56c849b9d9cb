"""The curator's tools for the cold store. Every change goes through a service, so it is
recorded as a FactEvent (who, when, old and new values) and can be audited or undone."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from memory_app import confidence as rules
from memory_app import services
from memory_app.models import Fact, FactEvent, Procedure, Summary, WorkingState
from memory_app.normalize import content_key

CONFIDENCE_STEP = 0.1


def _actor(request) -> str:
    return f"admin:{request.user.get_username()}"


class ConfidenceBand(admin.SimpleListFilter):
    title = "confidence"
    parameter_name = "band"
    BANDS = {
        "low": ("below 0.3 (never injected)", {"confidence__lt": rules.INJECTION_THRESHOLD}),
        "mid": (
            "0.3 - 0.8",
            {"confidence__gte": rules.INJECTION_THRESHOLD, "confidence__lt": rules.EXTRACTED},
        ),
        "high": (
            "0.8 - 0.9",
            {"confidence__gte": rules.EXTRACTED, "confidence__lt": rules.STRONG_SIGNAL},
        ),
        "strong": ("0.9 and above", {"confidence__gte": rules.STRONG_SIGNAL}),
    }

    def lookups(self, request, model_admin):
        return [(key, label) for key, (label, _) in self.BANDS.items()]

    def queryset(self, request, queryset):
        if self.value() in self.BANDS:
            return queryset.filter(**self.BANDS[self.value()][1])
        return queryset


class FactEventInline(admin.TabularInline):
    model = FactEvent
    fields = [
        "created_at",
        "event",
        "actor",
        "old_content",
        "new_content",
        "old_confidence",
        "new_confidence",
        "sources",
    ]
    readonly_fields = fields
    ordering = ["-created_at", "-id"]
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False


class FactForm(forms.ModelForm):
    supersede_with = forms.IntegerField(
        required=False,
        label="Superseded by fact #",
        help_text="The id of the owner's fact that replaces this one (it is kept, marked "
        "superseded).",
    )

    class Meta:
        model = Fact
        fields = ["owner", "content", "category", "confidence"]


@admin.register(Fact)
class FactAdmin(admin.ModelAdmin):
    form = FactForm
    list_display = [
        "content",
        "owner",
        "category",
        "confidence",
        "source",
        "status",
        "hit_count",
        "last_accessed",
    ]
    list_filter = ["category", "source", "status", ConfidenceBand]
    list_select_related = ["owner"]
    search_fields = ["content", "owner__username"]
    raw_id_fields = ["owner"]
    readonly_fields = [
        "source",
        "source_client",
        "status",
        "hit_count",
        "created_at",
        "updated_at",
        "last_accessed",
        "provenance",
        "superseded_by_link",
    ]
    inlines = [FactEventInline]
    actions = ["raise_confidence", "lower_confidence", "evict", "restore"]

    @admin.display(description="learnt in")
    def provenance(self, fact: Fact) -> str:
        """The messages it was said in (its sources), else the session it was written in."""
        sources = list(fact.sources.order_by("session_id", "seq").only("session_id", "seq", "role"))
        if sources:
            return format_html_join(
                ", ",
                '<a href="{}">{} #{}</a> ({})',
                (
                    (
                        reverse("admin:sessions_app_chatsession_change", args=[m.session_id]),
                        m.session_id,
                        m.seq,
                        m.role,
                    )
                    for m in sources
                ),
            )
        if fact.session_id is None:
            return "-"
        url = reverse("admin:sessions_app_chatsession_change", args=[fact.session_id])
        seq = f" (message #{fact.message.seq})" if fact.message_id else ""
        return format_html('<a href="{}">{}</a>{}', url, fact.session_id, seq)

    @admin.display(description="superseded by")
    def superseded_by_link(self, fact: Fact) -> str:
        if fact.superseded_by_id is None:
            return "-"
        url = reverse("admin:memory_app_fact_change", args=[fact.superseded_by_id])
        return format_html('<a href="{}">#{}</a>', url, fact.superseded_by_id)

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        if not change:
            fact = services.fact_write(
                owner=data["owner"],
                content=data["content"],
                category=data["category"],
                confidence=data["confidence"],
                source=Fact.Source.ADMIN,
            )
            obj.pk = fact.pk
        elif {"content", "category", "confidence"} & set(form.changed_data):
            # The form has already put the new values on obj: start from the stored row.
            fact = Fact.objects.get(pk=obj.pk)
            services.fact_edit(
                fact=fact,
                actor=_actor(request),
                content=data["content"],
                category=data["category"],
                confidence=data["confidence"],
            )
        successor_id = data.get("supersede_with")
        if successor_id:
            old = Fact.objects.get(pk=obj.pk)
            new = Fact.objects.filter(pk=successor_id, owner=old.owner).first()
            if new is None:
                raise ValidationError(f"fact #{successor_id} is not a fact of this owner")
            services.fact_supersede(old=old, new=new, actor=_actor(request))

    def _each(self, request, queryset, change, verb: str) -> None:
        done = 0
        for fact in queryset:
            change(fact)
            done += 1
        self.message_user(request, f"{verb} {done} fact(s).", messages.SUCCESS)

    @admin.action(description="Raise confidence by 0.1")
    def raise_confidence(self, request, queryset):
        self._each(
            request,
            queryset,
            lambda fact: services.fact_edit(
                fact=fact,
                actor=_actor(request),
                confidence=min(rules.CEILING, fact.confidence + CONFIDENCE_STEP),
            ),
            "Raised",
        )

    @admin.action(description="Lower confidence by 0.1")
    def lower_confidence(self, request, queryset):
        self._each(
            request,
            queryset,
            lambda fact: services.fact_edit(
                fact=fact,
                actor=_actor(request),
                confidence=max(0.0, fact.confidence - CONFIDENCE_STEP),
            ),
            "Lowered",
        )

    @admin.action(description="Evict (keep for audit, never inject)")
    def evict(self, request, queryset):
        # Forgetting, as the person does it through their own doors (services.fact_forget).
        self._each(
            request,
            queryset.exclude(status=Fact.Status.EVICTED),
            lambda fact: services.fact_forget(fact=fact, actor=_actor(request)),
            "Evicted",
        )

    @admin.action(description="Restore to active")
    def restore(self, request, queryset):
        self._each(
            request,
            queryset.exclude(status=Fact.Status.ACTIVE),
            lambda fact: services.fact_set_status(
                fact=fact, status=Fact.Status.ACTIVE, actor=_actor(request)
            ),
            "Restored",
        )


class ProcedureForm(forms.ModelForm):
    class Meta:
        model = Procedure
        fields = ["owner", "rule", "context", "active"]

    def clean(self):
        # What the services would refuse on save (lengths are the fields' validators), asked
        # here so it is a message on the form rather than an error page.
        data = super().clean()
        owner, rule = data.get("owner"), data.get("rule")
        if owner is None or rule is None:
            return data
        clash = Procedure.objects.filter(owner=owner, rule_key=content_key(rule))
        if clash.exclude(pk=self.instance.pk).exists():
            self.add_error("rule", "the same rule already exists")
        # Until _post_clean, self.instance holds the stored values.
        was_active = self.instance.pk is not None and self.instance.active
        if data.get("active") and not was_active:
            try:
                services.procedure_check_capacity(owner=owner)
            except ValidationError as exc:
                self.add_error("active", exc.message_dict["active"])
        return data


@admin.register(Procedure)
class ProcedureAdmin(admin.ModelAdmin):
    form = ProcedureForm
    list_display = ["rule", "owner", "active", "source", "created_at"]
    list_filter = ["active", "source"]
    list_select_related = ["owner"]
    search_fields = ["rule", "context", "owner__username"]
    raw_id_fields = ["owner"]
    fields = ["owner", "rule", "context", "active", "source", "created_at"]
    readonly_fields = ["source", "created_at"]

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        if change:
            # Through the service (the form has put the new values on obj: start from the
            # stored row), so the key follows the text and the limits hold.
            services.procedure_edit(
                procedure=Procedure.objects.get(pk=obj.pk),
                rule=data["rule"],
                context=data["context"],
                active=data["active"],
            )
            return
        procedure, _ = services.procedure_write(
            owner=data["owner"],
            rule=data["rule"],
            context=data["context"],
            source=Fact.Source.ADMIN,
            active=data["active"],
        )
        obj.pk = procedure.pk


class ReadOnlyAdmin(admin.ModelAdmin):
    """Written by the consolidator only: the admin shows them."""

    def has_add_permission(self, request) -> bool:
        return False

    def get_readonly_fields(self, request, obj=None):
        return [field.name for field in self.model._meta.fields]


@admin.register(Summary)
class SummaryAdmin(ReadOnlyAdmin):
    list_display = ["session", "first_round", "last_round", "model", "folded", "created_at"]
    list_filter = ["folded", "model"]
    search_fields = ["session__id", "text"]
    raw_id_fields = ["session"]


@admin.register(WorkingState)
class WorkingStateAdmin(ReadOnlyAdmin):
    list_display = [
        "session",
        "compressed_through",
        "extracted_through",
        "folded_through",
        "updated_at",
    ]
    search_fields = ["session__id"]
