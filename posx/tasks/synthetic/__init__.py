"""Synthetic tasks with exact answers, one module per family (shared layout in ``common``)."""

from posx.tasks.synthetic.addition import AdditionTask
from posx.tasks.synthetic.aggregation import CommonItemsTask, FrequentItemsTask
from posx.tasks.synthetic.common import Instances, StringTask, SyntheticTask
from posx.tasks.synthetic.copy import CopyTask
from posx.tasks.synthetic.duplicate import DuplicateTask
from posx.tasks.synthetic.dyck import DyckTask
from posx.tasks.synthetic.induction import InductionTask
from posx.tasks.synthetic.majority import MajorityTask
from posx.tasks.synthetic.modular import ModularSumTask
from posx.tasks.synthetic.multiplication import MultiplicationTask
from posx.tasks.synthetic.niah import NeedleTask
from posx.tasks.synthetic.odds_first import OddsFirstTask
from posx.tasks.synthetic.passkey import PasskeyTask
from posx.tasks.synthetic.recall import AssociativeRecallTask
from posx.tasks.synthetic.reverse import ReverseTask
from posx.tasks.synthetic.sort import SortTask
from posx.tasks.synthetic.variable_tracking import VariableTrackingTask

__all__ = [
    "AdditionTask",
    "AssociativeRecallTask",
    "CommonItemsTask",
    "CopyTask",
    "DuplicateTask",
    "DyckTask",
    "FrequentItemsTask",
    "InductionTask",
    "Instances",
    "MajorityTask",
    "ModularSumTask",
    "MultiplicationTask",
    "NeedleTask",
    "OddsFirstTask",
    "PasskeyTask",
    "ReverseTask",
    "SortTask",
    "StringTask",
    "SyntheticTask",
    "VariableTrackingTask",
]
