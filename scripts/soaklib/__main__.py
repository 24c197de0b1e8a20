"""``scripts/soak [--minutes N | --seconds S] [...]``: run the soak, print the summary table,
exit 0 when no invariant was violated, 1 when one was, 2 when the soak itself failed."""

from __future__ import annotations

import asyncio
import json
import logging
import sys

from soaklib import report
from soaklib.settings import parse_args
from soaklib.soak import SetupError, run_soak


def main(argv: list[str] | None = None) -> int:
    settings = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    if not settings.verbose:
        # The chaos timeline only; Azurite's and the Azure SDK's chatter stays out.
        logging.getLogger().setLevel(logging.WARNING)
        logging.getLogger("soak").setLevel(logging.INFO)
    try:
        result = asyncio.run(run_soak(settings))
    except SetupError as error:
        logging.getLogger("soak").error("%s", error)
        return 2
    except Exception:
        logging.getLogger("soak").exception("the soak itself failed")
        return 2
    print(report.text(result), flush=True)
    if settings.json_path is not None:
        settings.json_path.write_text(json.dumps(report.document(result), indent=2) + "\n")
    if settings.markdown_path is not None:
        settings.markdown_path.write_text(report.markdown(result))
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
