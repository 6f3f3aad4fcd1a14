"""``python -m shmkafka`` runs the ``shmkafka`` command."""

import sys

from shmkafka.cli import main

sys.exit(main())
