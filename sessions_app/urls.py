from django.urls import path

from sessions_app.apis import SessionApi, SessionMessagesApi, SessionsApi

urlpatterns = [
    path("sessions", SessionsApi.as_view(), name="api-sessions"),
    path("sessions/<str:session_id>", SessionApi.as_view(), name="api-session"),
    path(
        "sessions/<str:session_id>/messages",
        SessionMessagesApi.as_view(),
        name="api-session-messages",
    ),
]
