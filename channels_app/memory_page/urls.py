"""/memory/: the tabs (记忆, 新记住的, 规则, 情节, 会话, 已连接的应用; 我的画像 is /profile/) and
their forms."""

from django.urls import path
from django.views.generic import RedirectView

from channels_app.memory_page import imports, views

app_name = "memory"

urlpatterns = [
    path("", views.facts, name="facts"),
    path("facts/<int:fact_id>/", views.fact_detail, name="fact"),
    path("facts/<int:fact_id>/edit/", views.fact_edit, name="fact-edit"),
    path("facts/<int:fact_id>/forget/", views.fact_forget, name="fact-forget"),
    path("facts/<int:fact_id>/undo/", views.fact_undo, name="fact-undo"),
    path("facts/<int:fact_id>/keep/", views.fact_keep, name="fact-keep"),
    path("new/", views.new, name="new"),
    path("new/keep-all/", views.new_keep_all, name="new-keep-all"),
    path("procedures/", views.procedures, name="procedures"),
    path("procedures/<int:procedure_id>/edit/", views.procedure_edit, name="procedure-edit"),
    path("procedures/<int:procedure_id>/switch/", views.procedure_switch, name="procedure-switch"),
    path("procedures/<int:procedure_id>/delete/", views.procedure_delete, name="procedure-delete"),
    path("episodes/", views.episodes, name="episodes"),
    path("sessions/", views.sessions, name="sessions"),
    path("import/", imports.import_page, name="import"),
    path("import/<int:run_id>/status/", imports.import_status, name="import-status"),
    path("sessions/<str:session_id>/", views.session_detail, name="session"),
    path("sessions/<str:session_id>/delete/", views.session_delete, name="session-delete"),
    path("apps/", views.apps, name="apps"),
    path("apps/<int:connection_id>/disconnect/", views.app_disconnect, name="app-disconnect"),
    # 我的画像 is the profile app's own page (/profile/), shown under the same tabs.
    path("profile/", RedirectView.as_view(pattern_name="profile"), name="profile"),
]
