"""Every git call the supervisor makes, hardened against repository-controlled programs.

`run` is how git is started (the one place), `repo` decides which repository git may act
on, `work` reads and secures the work in it, `leftovers` cleans up after a killed git.
Callers use the names re-exported here.
"""

from agent_runner.vcs.identity import TreeIdentity
from agent_runner.vcs.kept import PREFIX as KEPT_PREFIX
from agent_runner.vcs.kept import Kept, keep_work, list_kept, prune_kept
from agent_runner.vcs.leftovers import clear_leftovers, index_lock_holders, remove_temp_objects
from agent_runner.vcs.repo import (
    GIT_MIN_BYTES_PER_S,
    Repo,
    head_sha,
    is_work_tree,
    open_repo,
    pin_tree,
    resolve,
    timeout_for,
)
from agent_runner.vcs.run import (
    GIT_TIMEOUT_S,
    HARDENED_ENV,
    HARDENING_ARGS,
    IDENTITY_EMAIL,
    IDENTITY_NAME,
    GitResult,
    filter_overrides,
    run_git,
)
from agent_runner.vcs.work import (
    Snapshot,
    StatusEntry,
    TreeEntry,
    all_but,
    clean_to_head,
    commit,
    file_sizes,
    filtered_paths,
    first_not_held,
    literal_pathspecs,
    operation_in_progress,
    snapshot,
    snapshot_tree,
    stash_commit,
    status,
    store_stash,
    submodule_paths,
    tree_entries,
)

__all__ = [
    "GIT_MIN_BYTES_PER_S",
    "GIT_TIMEOUT_S",
    "HARDENED_ENV",
    "HARDENING_ARGS",
    "IDENTITY_EMAIL",
    "IDENTITY_NAME",
    "KEPT_PREFIX",
    "GitResult",
    "Kept",
    "Repo",
    "Snapshot",
    "StatusEntry",
    "TreeEntry",
    "TreeIdentity",
    "all_but",
    "clean_to_head",
    "clear_leftovers",
    "commit",
    "file_sizes",
    "filter_overrides",
    "filtered_paths",
    "first_not_held",
    "head_sha",
    "index_lock_holders",
    "is_work_tree",
    "keep_work",
    "list_kept",
    "literal_pathspecs",
    "open_repo",
    "operation_in_progress",
    "pin_tree",
    "prune_kept",
    "remove_temp_objects",
    "resolve",
    "run_git",
    "snapshot",
    "snapshot_tree",
    "stash_commit",
    "status",
    "store_stash",
    "submodule_paths",
    "timeout_for",
    "tree_entries",
]
