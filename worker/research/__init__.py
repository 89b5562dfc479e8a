"""Research on the engine without a coordinator: the in-process simulator, the SAPO table
study's runner, its analysis and its report. Depends on worker.engine and worker.shared."""
