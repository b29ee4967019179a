"""The OpenAPI 3 description of /v1/ (document.py), with its maintenance and upgrade paths and what
they share; its request schemas are the server's rules too (schemacheck.py)."""
