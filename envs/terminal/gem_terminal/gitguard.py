"""The checker's ``git``: the real git, with every program a repository's own configuration names switched off.

A checker reads the agent's repositories (``git archive HEAD``, ``git status``, ``git diff``), and git runs
programs that the repository's configuration names: a filter driver's ``clean``/``smudge``/``process`` for
every path an attribute (``.gitattributes``, ``.git/info/attributes``) gives that filter, a diff driver's
``textconv``, a merge driver, editors, credential and signing helpers. The agent writes that configuration,
so without a guard its program runs as the checker, while the checker runs: it can write the reward
file and kill the checker (``git-driver-runs-in-the-checker`` in :mod:`gem_terminal.forgeries` did, on
the sandbox, until this guard).

:data:`GIT_GUARD` is a bash script that gem puts first on the checker's ``PATH`` (``/checker/bin/git``). For
each call it lists the configuration of the repository the call works in (the same ``-C``, ``-c``,
``--git-dir``, ``--work-tree``, ``--bare`` and ``--config-env`` options, and ``GIT_DIR`` and friends from the
environment, so the same repository is found), and sets every key of :data:`PROGRAM_KEYS` from a file the
checker did not write (the repository's own ``config``, its worktree config, what they include) to an
empty value (``filter.*.required`` to ``false``) in the call's command-line configuration
(``GIT_CONFIG_COUNT``), which wins over every file. An empty command is no command: git passes content
through as it is stored. Keys gem pins for every checker (``core.fsmonitor``, ``core.hooksPath``,
``core.pager``, ``diff.external``...: ``gem_terminal.env``) keep their pinned values. Where git cannot
list the configuration, the call runs unchanged: it cannot read that configuration either (or it makes a
repository, ``git --git-dir=NEW init``). A checker that runs git by its absolute path (``/usr/bin/git``)
bypasses the guard.
"""

from __future__ import annotations

__all__ = ["GIT_GUARD", "GUARD_PATH", "PROGRAM_KEYS"]

#: Where gem installs the guard in the checker's environment (first on its ``PATH``).
GUARD_PATH = "/checker/bin/git"

#: Configuration keys whose values git runs as programs (an extended regex over ``git config --name-only``'s
#: names: section and key lower case, a subsection as written, with any dots in it).
PROGRAM_KEYS = (
    r"^(filter\..+\.(clean|smudge|process|required)"
    r"|diff\..+\.(textconv|command)"
    r"|merge\..+\.driver"
    r"|(difftool|mergetool)\..+\.cmd"
    r"|trailer\..+\.(command|cmd)"
    r"|remote\..+\.(uploadpack|receivepack|vcs)"
    r"|credential\.(.+\.)?helper"
    r"|gpg\.(.+\.)?program|gpg\.ssh\.defaultkeycommand"
    r"|core\.(editor|askpass|sshcommand|gitproxy|alternaterefscommand)"
    r"|sequence\.editor|uploadpack\.packobjectshook)$"
)

GIT_GUARD = rf"""#!/bin/bash
# gem's git for the checker: the real git, with every program the repository's own configuration names
# switched off (see gem_terminal/gitguard.py). Installed as {GUARD_PATH}, first on the checker's PATH.
real=
IFS=: read -ra folders <<< "$PATH"
for folder in "${{folders[@]}}"; do
  if [ -n "$folder" ] && [ -x "$folder/git" ] && ! [ "$folder/git" -ef "${{BASH_SOURCE[0]}}" ]; then
    real=$folder/git
    break
  fi
done
if [ -z "$real" ]; then
  echo "git: not found on PATH (gem's checker git guard looked past itself)" >&2
  exit 127
fi
# The options before the subcommand that choose the repository or add configuration: replayed for the listing.
where=()
args=("$@")
i=0
while [ "$i" -lt "${{#args[@]}}" ]; do
  case ${{args[$i]}} in
    -C | -c | --git-dir | --work-tree | --config-env | --namespace)
      where+=("${{args[$i]}}" "${{args[$((i + 1))]}}")
      i=$((i + 2))
      ;;
    --git-dir=* | --work-tree=* | --config-env=* | --namespace=* | --bare)
      where+=("${{args[$i]}}")
      i=$((i + 1))
      ;;
    -*) i=$((i + 1)) ;;
    *) break ;;
  esac
done
# Where git cannot list the configuration, the call cannot read it either (or makes a repository: git init).
listing=$("$real" "${{where[@]}}" config --list --show-origin --name-only --includes 2>/dev/null) || exec "$real" "$@"
programs='{PROGRAM_KEYS}'
count=${{GIT_CONFIG_COUNT:-0}}
declare -A pinned=()
for ((n = 0; n < count; n++)); do
  key=GIT_CONFIG_KEY_$n
  pinned[${{!key,,}}]=1
done
while IFS=$'\t' read -r origin name; do
  case $origin in "command line:"*) continue ;; esac
  lower=${{name,,}}
  if [[ $lower =~ $programs ]] && [ -z "${{pinned[$lower]:-}}" ]; then
    value=
    [[ $lower == *.required ]] && value=false
    export "GIT_CONFIG_KEY_$count=$name" "GIT_CONFIG_VALUE_$count=$value"
    count=$((count + 1))
    pinned[$lower]=1
  fi
done <<< "$listing"
export GIT_CONFIG_COUNT=$count
exec "$real" "$@"
"""
