"""One term for one thing in the Chinese edition (issue 38 item 3; the 中文术语表 of notebooks/zh/00_welcome.ipynb).

The Chinese review (shared/reviews/chinese-edition.md, its terminology table and findings G1-G3, G7, 00-1, 00-4,
01-4, 01-7, 06-12, 06-13, 10-1, 10-11, 13-1, 13-2, 13-5, 13-15, R13) found the same thing named differently in the
Markdown, the printed output and the checkers. Each variant below is banned from every place a learner reads Chinese:
the zh catalog's msgstrs (flashmath/locale/zh_CN/LC_MESSAGES/flashmath.po), every Markdown cell of notebooks/zh/,
the comment of the language cell, and README.zh-CN.md. The patterns are narrow on purpose: 缩放 stays for the 1/sqrt(D)
scale, 范围 for a floating-point range or a window's extent, 内核 in "Jupyter 内核".
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PO = ROOT / "flashmath" / "locale" / "zh_CN" / "LC_MESSAGES" / "flashmath.po"
README = ROOT / "README.zh-CN.md"
ZH_NOTEBOOKS = sorted((ROOT / "notebooks" / "zh").glob("*.ipynb"))
LANGUAGE_CELL = 'import flashmath\n\nflashmath.set_language("zh_CN")'

#: (banned phrase, a regular expression; the preferred term; why)
BANNED: list[tuple[str, str, str]] = [
    (r"分组 ?query", "分组查询注意力（GQA）；头叫 query 头、KV 头", "13-1: half-translated; GQA is 分组查询注意力"),
    (r"多 ?query attention", "多查询注意力（MQA）", "13-1: half-translated; MQA is 多查询注意力"),
    (r"kv 头", "KV 头", "13-15: the head is written KV 头, as KV cache"),
    (r"KV ?缓存", "KV cache", "00-1, 13-5: the glossary keeps KV cache in English"),
    (r"判语", "反馈（提示信息）", "R13: 判语 is a literary/legal word"),
    (r"流过|从它面前|从旁边依次", "依次读入 / 流式读入", "G3: a calque of 'stream past'"),
    (r"块步", "步（分块循环的一步）", "06-13: 块步 and 分块步骤 are coinages; the glossary defines 步"),
    (r"标准算法", "标准 attention", "06-12: the prose says 标准 attention"),
    (
        r"全部可见|部分可见|（全部被掩码）|全部被掩码的|全部被掩码和",
        "空块 / 部分块 / 满块",
        "13-2: one name per block kind",
    ),
    (r"(?<!重)缩放因子", "重缩放因子（rescale）；1/sqrt(D) 是缩放系数", "G1, 00-4: 缩放 alone is the 1/sqrt(D) scale"),
    (
        r"合并时没有缩放|漏了 s 的缩放|只缩放了|的缩放颠倒|缩放用在了新的|时缩放旧的和|它只缩放和累加",
        "重新缩放",
        "G1: the online-softmax rescale is 重新缩放",
    ),
    (
        r"\A缩放\Z|缩放 \{scale|缩放与 dtype",
        "放大倍数",
        "01-7, G1: chapter 1's multiplier is 放大倍数, not the 1/sqrt(D) scale",
    ),
    (r"\A变体\Z", "写法", "01-4: implementations are 写法; 变体 is an attention variant"),
    (r"由分数组成", "小数（非整数）", "G7: 分数 means the attention scores"),
    (r"(空|key |两个|第一个|每个)范围", "段", "10-1: a split-KV part is a 段"),
    (
        r"(?<!Jupyter )(?<!“)(?<!→ 重启)内核|不需要 kernel 也能",
        "Jupyter 内核（kernel alone is GPU code; JupyterLab's Chinese menu “内核 → 重启内核” quoted as it is)",
        "G2: two kernels, two words",
    ),
    (r"溢出到", "溢出（spill）到", "10-11: 溢出 alone is an overflow"),
    (r"运行最大值", "当前最大值", "glossary: running max is 当前最大值"),
    (r"普通公式|普通写法", "直接 / 朴素", "01-13: naive is 朴素, direct is 直接"),
    (r"屏蔽|被掩盖|掩盖的", "掩码 / 被掩码", "zhrev-g 01-1: a masked key or row is 被掩码, as the glossary says"),
    (r"关注", "可见 / 参与注意力", "zhrev-g 01-2: attend is 可见 or 参与注意力 in the glossary"),
    (r"遮住", "被掩码", "zhrev-l 14-2: a hidden (masked) step or key is 被掩码, as the glossary says"),
    (r"参与注意力的对数|\) 对数", "(query, key) 对的个数", "zhrev-l 14-1: 对数 is the logarithm"),
    (
        r"(?<!分组)(?<!多)查询(?!注意力|、键、值)",
        "query（分组查询注意力、多查询注意力和术语表的“查询、键、值”除外）",
        "rev15-a: the glossary keeps query in English; 查询 only in the names of GQA and MQA",
    ),
    (
        r"性质用例|【性质|边界用例",
        "特殊用例",
        "zhrev-h 13-2, zhrev-p 00-3: an all-negative input is no edge; special case fits all",
    ),
    (r"局部内存", "本地内存（local memory）", "zhrev-ac 11-7: the glossary's spill goes to 本地内存"),
    (r"寄存器堆", "寄存器文件", "zhrev-ac 11-4: chapter 10 and the glossary say 寄存器文件"),
    (r"遮蔽", "被掩码", "zhrev-ad 11-6: a masked row or key is 被掩码, as the glossary says"),
    (r"载入", "读入", "zhrev-ad 11-6: a load is 读入, as the glossary says"),
    (r"流水化", "流水线化", "zhrev-ac 11-9: the prose pipelines with 流水线化"),
    (
        r"惰性重新缩放|(懒惰|延迟)重?新?缩放",
        "惰性重缩放（lazy rescaling）",
        "zhrev-ap 00-2: the glossary names FlashAttention-4's lazy rescaling 惰性重缩放",
    ),
    (
        r"(?<![（(\w.`])(?<!\| )program(?![\w`])",
        "程序实例、程序（program 只在首次出现的括注里和术语表的英文列）",
        "zhrev-ac 11-1, 11-6: a Triton program is 程序 in Chinese text, figures and feedback",
    ),
]


def catalog() -> list[tuple[str, str]]:
    """(where, text) for each msgstr of the zh catalog."""
    from babel.messages.pofile import read_po

    with PO.open("rb") as f:
        cat = read_po(f)
    out = []
    for m in cat:
        if not m.id:
            continue
        msgid = m.id if isinstance(m.id, str) else m.id[0]
        for s in [m.string] if isinstance(m.string, str) else m.string:
            out.append((f"{PO.relative_to(ROOT)} msgid {msgid!r}", s))
    return out


def notebooks() -> list[tuple[str, str]]:
    """(where, text) for each Markdown cell and the language cell's comment of the Chinese chapters."""
    out = []
    for path in ZH_NOTEBOOKS:
        for k, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
            text = "".join(cell["source"])
            if cell["cell_type"] == "markdown" or text.startswith(LANGUAGE_CELL):
                out.append((f"{path.relative_to(ROOT)} cell {k} (id {cell.get('id')})", text))
    return out


def texts() -> list[tuple[str, str]]:
    return catalog() + notebooks() + [(str(README.relative_to(ROOT)), README.read_text(encoding="utf-8"))]


def offences(sources: list[tuple[str, str]]) -> list[str]:
    found = []
    for where, text in sources:
        for pattern, preferred, why in BANNED:
            for m in re.finditer(pattern, text):
                context = text[max(0, m.start() - 15) : m.end() + 15].replace("\n", " ")
                found.append(f"{where}: {m.group(0)!r} in …{context}… → {preferred} ({why})")
    return found


def test_every_place_is_read():
    """The test looks where it should: the catalog, sixteen chapters and the README are all there."""
    assert PO.exists() and README.exists()
    assert len(ZH_NOTEBOOKS) >= 16
    assert len(catalog()) > 1000


@pytest.mark.parametrize(("pattern", "preferred", "why"), BANNED, ids=[b[0] for b in BANNED])
def test_the_banned_patterns_catch_what_they_ban_and_spare_the_rest(pattern, preferred, why):
    """Each pattern is a valid expression that does not catch its own preferred term."""
    assert not re.search(pattern, preferred), f"{pattern!r} bans its own preferred term {preferred!r}"


def test_one_term_for_one_thing():
    found = offences(texts())
    assert not found, f"{len(found)} banned variant(s) in the Chinese edition:\n" + "\n".join(found)


def test_the_check_can_fail():
    """A text with each kind of offence is caught, and the preferred wording passes."""
    bad = [("x", "分组 query attention、KV 缓存、标准算法、缩放因子、两个范围、从旁边依次流过、重启内核、一个查询")]
    assert len(offences(bad)) >= 8
    good = [
        (
            "y",
            "分组查询注意力（GQA）、KV cache、标准 attention、重缩放因子、两段、依次读入、重启 Jupyter 内核；"
            "菜单“内核 → 重启内核”；浮点数的范围；多查询注意力（MQA）、一个 query、程序实例（program instance）",
        )
    ]
    assert offences(good) == []
