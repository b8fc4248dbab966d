"""Small files in the formats corpora come in, built in the test (never copied from a corpus): FineWeb-style and
The Stack-style Parquet, WET and WARC records, and source files of a repository."""

from __future__ import annotations

import io

# a few source files of a repository (path -> code) that pass the code profile's filters
SOURCES: dict[str, str] = {
    "src/geometry.py": (
        '"""Areas of simple shapes."""\n\nimport math\n\n\ndef circle_area(radius: float) -> float:\n'
        "    return math.pi * radius * radius\n\n\ndef rectangle_area(width: float, height: float) -> float:\n"
        '    return width * height\n\n\nif __name__ == "__main__":\n    print(circle_area(2.0), rectangle_area(3, 4))\n'
    ),
    "cmd/server/main.go": (
        'package main\n\nimport (\n\t"fmt"\n\t"net/http"\n)\n\nfunc hello(w http.ResponseWriter, r *http.Request) {\n'
        '\tfmt.Fprintf(w, "hello from the server\\n")\n}\n\nfunc main() {\n\thttp.HandleFunc("/", hello)\n'
        '\thttp.ListenAndServe(":8080", nil)\n}\n'
    ),
    "crates/stack/src/lib.rs": (
        "pub struct Stack<T> {\n    items: Vec<T>,\n}\n\nimpl<T> Stack<T> {\n    pub fn new() -> Self {\n"
        "        Stack { items: Vec::new() }\n    }\n\n    pub fn push(&mut self, item: T) {\n"
        "        self.items.push(item);\n    }\n\n    pub fn pop(&mut self) -> Option<T> {\n"
        "        self.items.pop()\n    }\n}\n"
    ),
    "web/counter.js": (
        "export function makeCounter(start) {\n  let count = start;\n  return {\n"
        "    increment() {\n      count += 1;\n      return count;\n    },\n    reset() {\n"
        "      count = start;\n    },\n  };\n}\n"
    ),
    "lib/greeter.rb": (
        "class Greeter\n  def initialize(name)\n    @name = name\n  end\n\n  def greet\n"
        '    "Hello, #{@name}! Welcome to the library."\n  end\nend\n\nputs Greeter.new("reader").greet\n'
    ),
}


def parquet_bytes(columns: dict[str, list], row_group_size: int | None = None) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = io.BytesIO()
    pq.write_table(pa.table(columns), out, row_group_size=row_group_size)
    return out.getvalue()


def fineweb_parquet(texts: list, row_group_size: int = 2) -> bytes:
    """FineWeb's schema: text, id, dump, url, date, file_path, language, language_score, token_count."""
    n = len(texts)
    return parquet_bytes(
        {
            "text": texts,
            "id": [f"<urn:uuid:{i:08d}>" for i in range(n)],
            "dump": ["CC-MAIN-2024-10"] * n,
            "url": [f"https://example.org/page/{i}" for i in range(n)],
            "date": ["2024-02-21T12:00:00Z"] * n,
            "file_path": ["s3://commoncrawl/crawl-data/x.warc.gz"] * n,
            "language": ["en"] * n,
            "language_score": [0.93] * n,
            "token_count": [100 + i for i in range(n)],
        },
        row_group_size,
    )


def stack_parquet(files: dict[str, str]) -> bytes:
    """The Stack's schema (v1 / v2-dedup with contents): content, path, blob_id, language, ..."""
    from pipeline_project.cleaning.read.suffixes import source_language

    paths = list(files)
    return parquet_bytes(
        {
            "blob_id": [f"{i:040x}" for i in range(len(paths))],
            "path": paths,
            "content": [files[p] for p in paths],
            "language": [(source_language(p) or "unknown").title() for p in paths],
            "length_bytes": [len(files[p]) for p in paths],
            "repo_name": ["octo/demo"] * len(paths),
        }
    )


def warc_bytes(records: list[tuple], gzip: bool = False) -> bytes:
    """A WARC of `records`: (type, uri, payload bytes, content type or None, http status line or None)."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    out = io.BytesIO()
    writer = WARCWriter(out, gzip=gzip)
    writer.write_record(writer.create_warcinfo_record("test.warc", {"software": "pipeline_project tests"}))
    for kind, uri, payload, ctype, status in records:
        http = None
        if status is not None:
            http = StatusAndHeaders(status, [("Content-Type", ctype or "text/html")], protocol="HTTP/1.1")
        record = writer.create_warc_record(
            uri,
            kind,
            payload=io.BytesIO(payload),
            http_headers=http,
            warc_content_type=None if http is not None else (ctype or "text/plain"),
        )
        writer.write_record(record)
    return out.getvalue()


def html_page(title: str, text: str) -> bytes:
    paragraphs = "".join(f"<p>{p}</p>" for p in text.split("\n") if p.strip())
    return (
        f"<html><head><title>{title}</title></head><body><nav><a href='/'>Home</a></nav>"
        f"<article><h1>{title}</h1>{paragraphs}</article><footer>Contact us</footer></body></html>"
    ).encode()
