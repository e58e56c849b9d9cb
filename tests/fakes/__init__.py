"""Loopback fake servers that speak each provider's wire protocol, for the real SDK clients.

Each fake records every request (path, headers, JSON body), answers from a script of replies,
and checks the requests the way the real service does for the rules Ethan depends on (answering
400 with that protocol's error shape when a rule is broken), so a test fails when the wire
request is wrong, not only when the reply is parsed wrong.
"""
