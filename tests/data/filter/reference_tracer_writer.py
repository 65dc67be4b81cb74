"""Run with synth-ai 0.2.17's python: writes a trace database through the reference's own SessionTracer
(`python reference_tracer_writer.py DB_PATH`), for the filter compatibility tests."""

import asyncio, json, sys
from synth_ai.tracing_v3 import SessionTracer

IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}

async def main(path):
    tracer = SessionTracer(db_url=f"sqlite+aiosqlite:///{path}", auto_save=True)
    await tracer.initialize()
    specs = [
        ("r1", {"task_split": "train", "task_id": "a", "model": "m1", "seed": 1, "judge_scores": {"q": 0.9}}, 1,
         [("What is 1+1?", "2")]),
        ("r2", {"task_split": "test", "task_id": "b", "model": "m2", "seed": 2}, 0,
         [({"role": "user", "content": "Two turns?"}, {"role": "assistant", "content": "yes"}),
          ("second", "ok")]),
        ("r3", {"task_split": "train", "task_id": "c", "model": "m1", "env_name": "crafter"}, 1,
         [({"role": "user", "content": [{"type": "text", "text": "look"}, IMAGE]}, "a tree")]),
        ("r4", {"task_split": "train", "task_id": "d", "model": "m1", "prompt": "p?", "completion": "c!"}, None, []),
    ]
    for sid, meta, reward, turns in specs:
        await tracer.start_session(session_id=sid, metadata=meta)
        for i, (user, assistant) in enumerate(turns):
            await tracer.start_timestep(f"turn-{i}")
            await tracer.record_message(content=user, message_type="user")
            await tracer.record_message(content=assistant, message_type="assistant")
            await tracer.end_timestep()
        if reward is not None:
            await tracer.record_outcome_reward(total_reward=reward, achievements_count=reward, total_steps=len(turns))
        await tracer.end_session()
        await asyncio.sleep(0.01)
    await tracer.close()

asyncio.run(main(sys.argv[1]))
