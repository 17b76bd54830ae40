"""Device profiles (data in *.json beside this file; code in profiles.py)."""
