"""A user's module that fails to import (for impala-gym's start-up error tests)."""

import not_a_real_module_for_impala_tests  # noqa: F401
