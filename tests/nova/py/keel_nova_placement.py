"""Placement 8's WSGI application for gunicorn.

OS_PLACEMENT_CONFIG_DIR names the folder with placement.conf.
"""
from placement import wsgi

application = wsgi.init_application()
