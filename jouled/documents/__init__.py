"""The wire documents and their vocabulary: statuses, test outcomes, entry kinds.

The vocabulary (`jouled.documents.vocabulary`) is declared once, below the
contracts and the pipeline, so every layer spells it the same way.

The documents themselves (ledger entry bodies and the signed payload in
`jouled.documents.bodies`; the export line, the receipts and the frontier row
in `jouled.documents.sent`; the answers to the other queries in
`jouled.documents.answers`, imported from there) are dataclasses on `jouled.documents.base.Document`
with `parse`, which checks a JSON object and names the first bad field, and
`to_dict`, which gives back exactly the object the daemon signs or sends.
docs/ledger.md and docs/protocol.md describe them, and name the classes this
package exports; the tests hold their examples to these classes.
"""

from jouled.documents.bodies import (
    AbortBody,
    BaselineBody,
    CalibrationBody,
    GenesisBody,
    KeyRotationBody,
    OpBody,
    Payload,
    ResultBody,
    parse_body,
)
from jouled.documents.sent import ExportRecord, FrontierRow, OpReceipt, Receipt

__all__ = [
    "AbortBody",
    "BaselineBody",
    "CalibrationBody",
    "ExportRecord",
    "FrontierRow",
    "GenesisBody",
    "KeyRotationBody",
    "OpBody",
    "OpReceipt",
    "Payload",
    "Receipt",
    "ResultBody",
    "parse_body",
]
