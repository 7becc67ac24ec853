"""HTTP layer: aiohttp app factory, auth, msgspec schemas, error mapping."""
