"""Output helpers shared by the PyTorch comparison scripts in bench/ (CSV and Markdown files)."""
import csv
import os


def write_csv(path, rows):
    """Writes a list of dicts (all with the same keys) as CSV, creating the folder."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {path}")


def write_text(path, text):
    """Writes text to path, creating the folder."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    print(f"wrote {path}")


def print_table(lines, markdown_path=None):
    """Prints Markdown lines as one text and writes it to markdown_path when given."""
    text = "\n".join(lines) + "\n"
    print(text)
    if markdown_path:
        write_text(markdown_path, text)
