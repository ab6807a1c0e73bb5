"""The Profile, the contract every layer above `methods` reads: one deployment's latency, acceptance,
engine terms, workload, machine and provenance, typed and frozen (`profiles.profile.Profile`), with
its JSON schema and migrations (`profiles.schema`)."""
from profiles.profile import Profile
from profiles.schema import SCHEMA_VERSION

__all__ = ["Profile", "SCHEMA_VERSION"]
