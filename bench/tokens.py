"""The token estimate (shared.model.tokens) against the local model's own tokenizer.

Counts each text of a small English and Chinese corpus twice: by the estimate, and by
SmolLM2-135M's tokenizer through the local model server (llama-cpp-python's POST
/extras/tokenize/count, what the smollm2-local card's `tokenizer: llama_cpp_python` uses).
Prints, per language, the estimate's total over the tokenizer's (above 1: the estimate
overcounts, leaving that share of the window unused), the lowest and highest ratio of a
single text (below 1: an undercount the endpoint refuses), and what
share of the card's input budget the estimate lets real text fill.

    python -m bench.tokens [--base-url http://127.0.0.1:PORT/v1]

Without --base-url it starts the local model server on a free port (make model-server).
"""

from __future__ import annotations

import argparse
import asyncio

from services.executor.context import input_budget
from services.launcher import LOCAL_CARD, LocalModelServer, free_port
from shared.model.cards import load_card
from shared.model.openai import OpenAIChatModel
from shared.model.tokens import text_tokens

ENGLISH = [
    "Can you remind me what we decided about the quarterly budget meeting? I think it was "
    "moved to Thursday afternoon, but I am not sure whether the finance team agreed.",
    "The ferry leaves the harbour at ten past nine on weekdays and at half past ten on "
    "Sundays. Tickets can be bought on board, but only with cash, so bring some coins.",
    "I prefer green tea in the morning and coffee after lunch. Please do not suggest "
    "anything with milk: I have been lactose intolerant since I was a child.",
    "def fit(history, pinned, tools, budget):\n    head = 0\n    while head < len(history):"
    "\n        head += 1\n    return history[head:]",
    "Order #48213 shipped on 2026-03-14 via express; tracking code ZX-99-1044-B. Expected "
    "delivery: 3 to 5 business days, signature required at the door.",
    "Photosynthesis converts light energy into chemical energy. Chlorophyll absorbs mostly "
    "blue and red light, which is why the leaves of most plants look green to us.",
    "Thanks! That worked. One more thing: how do I undo the last commit without losing the "
    "changes in my working tree? I only want to fix the commit message.",
    "The committee will review every application received before the end of the month and "
    "will notify the shortlisted candidates by email within two weeks.",
]
CHINESE = [
    "你能提醒我一下我们关于季度预算会议的决定吗？我记得是改到了周四下午，但不确定财务团队是否同意。",
    "渡轮工作日九点十分离港，周日十点半离港。船上可以买票，但只收现金，所以请带些零钱。",
    "我早上喜欢喝绿茶，午饭后喝咖啡。请不要推荐任何含牛奶的东西，我从小就乳糖不耐受。",
    "订单号48213已于2026年3月14日通过快递发出，运单号ZX-99-1044-B，预计三到五个工作日送达。",
    "光合作用把光能转化为化学能。叶绿素主要吸收蓝光和红光，所以大多数植物的叶子看起来是绿色的。",
    "谢谢，这个办法有效。还有一个问题：怎样撤销最后一次提交而不丢失工作区里的修改？",
    "委员会将审阅月底前收到的所有申请，并在两周内通过电子邮件通知入围的候选人。",
    "明天北京多云转晴，最高气温二十三度，最低气温十二度，北风三到四级，适合户外活动。",
]


async def measure(base_url: str) -> None:
    card = load_card(LOCAL_CARD).model_copy(update={"base_url": base_url})
    model = OpenAIChatModel(card)
    budget = input_budget(card)
    print("| text | texts | estimate | tokenizer | estimate / tokenizer | per text: min, max |")
    print("|---|---|---|---|---|---|")
    try:
        for language, texts in (("English", ENGLISH), ("Chinese", CHINESE)):
            counts = await model.count_tokens(texts)
            if counts is None:
                raise SystemExit(f"the model server at {base_url} does not count tokens")
            estimates = [text_tokens(t) for t in texts]
            ratio = sum(estimates) / sum(counts)
            each = [e / c for e, c in zip(estimates, counts, strict=True)]
            print(
                f"| {language} | {len(texts)} | {sum(estimates)} | {sum(counts)} | "
                f"{ratio:.2f} | {min(each):.2f}, {max(each):.2f} |"
            )
            print(
                f"|  | the estimate fills the input budget ({budget} tokens) with about "
                f"{budget / ratio:.0f} real tokens ({100 / ratio:.0f}%) | | | | |"
            )
    finally:
        await model.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default="")
    args = parser.parse_args()
    if args.base_url:
        asyncio.run(measure(args.base_url))
        return
    server = LocalModelServer(free_port())
    server.start()
    try:
        asyncio.run(measure(server.base_url))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
