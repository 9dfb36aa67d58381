"""Markdown tables for the pages acgan writes (report.md, compare.md, benchmark.md)."""


def na(value, fmt=",.1f", suffix=""):
    """`value` formatted (and `suffix`), or "n/a" where there is none: a table's cell for a number."""
    return "n/a" if value is None else f"{value:{fmt}}{suffix}"


def row(cells):
    """One table line, "| a | b |"; an empty cell is written as a single space ("| a | |")."""
    return "|" + "".join(f" {cell} |" if cell != "" else " |" for cell in map(str, cells))


def table(header, rows, align=None):
    """A table's lines: the header, the alignment line, then one line per row.

    align: one character per column, "l" (---) or "r" (---:, numbers); default every column "l"."""
    align = align or "l" * len(header)
    return [row(header), "|" + "".join("---:|" if a == "r" else "---|" for a in align)] + [
        row(r) for r in rows
    ]
