"""The confluent API's delivery reports served in C (``_reports.c``, an extension of its
own): the delivered common record's ``Message`` made and its callback called without a Python
frame; every other report goes to the Python hook it is given (``Producer._serve_report``,
the reference). ``serve_reports`` is None when the extension is not built or
``SHMKAFKA_PURE_PYTHON`` is set."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from shmkafka.producer.views import native_check

# serve_reports(reports, message_type, serve_other) -> (served, last exception raised)
ServeReports = Callable[
    [Any, Any, Callable[[Any], BaseException | None]], tuple[int, BaseException | None]
]
serve_reports: ServeReports | None

if TYPE_CHECKING:
    serve_reports = None
else:
    try:
        native_check()
        from shmkafka.facades.confluent._reports import serve_reports
    except ImportError:  # not built
        serve_reports = None
