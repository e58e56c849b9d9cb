class SessionError(Exception):
    """A session reference that cannot be used; the message is one readable line."""


class SessionNotFound(SessionError):
    pass


class SessionAmbiguous(SessionError):
    def __init__(self, ref: str, candidates: list[str]):
        self.ref = ref
        self.candidates = candidates
        super().__init__(
            f"session '{ref}' is ambiguous: it matches {', '.join(candidates)}; give more of the id"
        )
