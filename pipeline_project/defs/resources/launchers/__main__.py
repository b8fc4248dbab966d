"""`python -m pipeline_project.defs.resources.launchers jobset --launch-from ...`: print the multi-node recipe."""

import sys

from pipeline_project.defs.resources.launchers.jobset import main

sys.exit(main())
