"""StaticModule, StaticRuntime and the executors that run a prepared graph."""
