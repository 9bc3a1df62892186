"""Deployment profiles (shell): built-in YAML data, user profiles, `extends:`, validation."""

from servekit.profiles.loader import (
    ProfileRef,
    available_profiles,
    check_profile_output,
    load_profile,
    profile_from_data,
    search_dirs,
)
from servekit.profiles.schema import Profile

__all__ = [
    "Profile",
    "ProfileRef",
    "available_profiles",
    "check_profile_output",
    "load_profile",
    "profile_from_data",
    "search_dirs",
]
