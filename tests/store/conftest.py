import pytest

from tests.store.databases import DB_PARAMS, make_store


@pytest.fixture(params=DB_PARAMS)
def store(request, tmp_path):
    yield from make_store(request.param, tmp_path)
