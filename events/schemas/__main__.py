from events.schemas import write

for path in write():
    print(path)
