"""Write docs/architecture.md's generated parts (the tables of packages and wings, the diagram)
from the house rules and the code: ``tests/support/architecture.py`` says what they hold.

    python scripts/architecture.py          rewrite the page
    python scripts/architecture.py --check  exit 1 when the page is stale (changes nothing)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.architecture import PAGE, rewrite


def main(argv: list[str]) -> int:
    page = PAGE.read_text(encoding="utf-8")
    fresh = rewrite(page)
    if "--check" in argv:
        if fresh != page:
            print(f"{PAGE} is stale: run python scripts/architecture.py", file=sys.stderr)
            return 1
        return 0
    if fresh != page:
        PAGE.write_text(fresh, encoding="utf-8")
        print(f"rewrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
