from django.contrib import admin

from episodes_app.models import Episode


@admin.register(Episode)
class EpisodeAdmin(admin.ModelAdmin):
    list_display = ["session_ref", "owner", "timestamp", "turn_count", "model", "keyword_list"]
    list_filter = ["model", ("timestamp", admin.DateFieldListFilter)]
    list_select_related = ["owner"]
    search_fields = ["summary", "session_ref", "owner__username"]
    raw_id_fields = ["owner", "session"]
    date_hierarchy = "timestamp"

    @admin.display(description="keywords")
    def keyword_list(self, episode: Episode) -> str:
        return ", ".join(episode.keywords)
