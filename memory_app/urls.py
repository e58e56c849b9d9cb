from django.urls import path

from memory_app import apis

urlpatterns = [
    path("facts", apis.FactsApi.as_view(), name="api-facts"),
    path("facts/<int:fact_id>", apis.FactApi.as_view(), name="api-fact"),
    path("facts/<int:fact_id>/history", apis.FactHistoryApi.as_view(), name="api-fact-history"),
    path("procedures", apis.ProceduresApi.as_view(), name="api-procedures"),
    path("procedures/<int:procedure_id>", apis.ProcedureApi.as_view(), name="api-procedure"),
]
