# SPDX-License-Identifier: MIT
"""python3 -m kvmm.llm: the kvmm-llm command."""
import sys

from .cli import main

sys.exit(main())
