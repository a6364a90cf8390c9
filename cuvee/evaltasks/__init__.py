"""One home for evaluation tasks (lm-evaluation-harness task YAMLs and plain eval files), used alike by the
decontaminate stage, anneals' ``downstream:``, ``eval-downstream`` and mix-search ``lm_eval:`` targets:

- :mod:`.loader`: a task YAML constructed as lm-eval constructs it (includes, merge keys, anchors), under
  cuvee.yaml_safe's bounds, with ``!function`` as an inert :class:`~.loader.FunctionRef`;
- :mod:`.tasks`: one resolution of a name or path (:func:`load_task`), of ``data_files``, of the task-code check
  (:func:`check_code`), and the list of files a task reads (:meth:`Task.files`, for plan stamps);
- :mod:`.items`: items read offline for decontamination, strictly decoded;
- :mod:`.render`: the checked dict handed to lm-eval (:func:`lm_eval_config`), and items rendered through it.

It imports nothing from cuvee but ``cuvee.kernel`` and ``cuvee.yaml_safe``; lm-eval only inside functions.
"""

from cuvee.evaltasks.errors import EvalTaskError
from cuvee.evaltasks.loader import FunctionRef
from cuvee.evaltasks.tasks import TASKS_DIR, Task, check_code, checked_task, load_task, task_index

__all__ = ["TASKS_DIR", "EvalTaskError", "FunctionRef", "Task", "check_code", "checked_task", "load_task",
           "task_index"]
