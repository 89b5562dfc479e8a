"""Volunteers: accounts, their own worker tokens, credit for verified work, leaderboards and the
pages of volunteers and nodes (docs/volunteers.md). Above both apps: it imports campaigns and
coordinator, neither imports it."""
