"""The functions-framework source of modelhooks: one target per function.

    functions-framework --target register          (from this directory)
    gcloud functions deploy register --gen2 --runtime python311 --source . --entry-point register

requirements.txt next to this file installs modelhooks with what every target imports.
"""

from modelhooks.main import *  # noqa: F403
