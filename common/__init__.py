"""Plumbing every stage shares: one-line input errors (`errors`) and atomic writes (`atomic`)."""
