"""The peer's graph for `make bench`: router -> worker, the worker's reply scripted like
agentmesh's scripted model ("You said: ..."), so both sides do the same work without a
model. Runs inside the LangGraph dev server's own venv (.venv-peer), never the suite's."""

from langchain_core.messages import AIMessage
from langgraph.graph import END, START, MessagesState, StateGraph


def router(state: MessagesState) -> dict[str, list[AIMessage]]:
    # agentmesh's router without a model call decides by rule; nothing to add to the state.
    return {"messages": []}


def worker(state: MessagesState) -> dict[str, list[AIMessage]]:
    text = state["messages"][-1].content if state["messages"] else ""
    return {"messages": [AIMessage(content=f'You said: "{text}". This is turn 1 of our chat.')]}


builder = StateGraph(MessagesState)
builder.add_node("router", router)
builder.add_node("worker", worker)
builder.add_edge(START, "router")
builder.add_edge("router", "worker")
builder.add_edge("worker", END)
graph = builder.compile()
